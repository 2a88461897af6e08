"""What every layer above may use at run time: clock and deadline, retry policy, secrets,
logs, failpoints and the run summary. Nothing here talks to a server."""
