"""`relay status`'s checks, each declared once in :data:`STATUS`."""

from __future__ import annotations

from relay.settings.spec import Setting, choice, seconds_or_zero, whole_or_zero

OUTPUTS = ("text", "json")

STATUS = (
    Setting(
        "output",
        "RELAY_STATUS_OUTPUT",
        "--output",
        choice(*OUTPUTS),
        "text",
        "text or json (one object)",
    ),
    Setting(
        "max_lag",
        "RELAY_STATUS_MAX_LAG",
        "--max-lag",
        whole_or_zero,
        help="exit 6 when a relay partition has more than N rows pending or a mirror "
        "partition lags more than N records",
        default_doc="no check",
        metavar="N",
    ),
    Setting(
        "max_age_s",
        "RELAY_STATUS_MAX_AGE_S",
        "--max-age",
        seconds_or_zero,
        help="exit 6 when a pending outbox row is older than this",
        default_doc="no check",
        metavar="SECONDS",
    ),
)
"""The checks, by field of :class:`~relay.commands.status.StatusOptions`."""
