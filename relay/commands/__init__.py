"""The typed command API: what ``relay`` and the Spark jobs do, as functions and classes
that take typed settings and return typed results.

:mod:`~relay.commands.run` (the forward relay), :mod:`~relay.commands.mirror` (the mirror),
:mod:`~relay.commands.db` (migrations and roles). The CLI (:mod:`relay.cli`) is a thin shell
over these; the jobs in ``jobs/`` call them too.
"""
