"""What every layer above may use at run time: clock and deadline, retry policy, batch
limits, secrets, logs, failpoints, metrics and health, progress and the run summary.
Nothing here talks to a database or a broker."""
