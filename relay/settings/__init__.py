"""Typed settings and the one loader they share: a CLI flag wins over ``RELAY_*``.

:mod:`~relay.settings.relay` (connections and the forward relay), :mod:`~relay.settings.mirror`
(the mirror), :mod:`~relay.settings.flags` (the flags the CLI and the Spark jobs share).
"""
