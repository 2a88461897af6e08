"""The typed command API: what ``relay`` and the Spark jobs do, as functions and classes
that take typed settings and return typed results.

:mod:`~relay.commands.run` (the forward relay: :mod:`~relay.commands.startup` its checks,
:mod:`~relay.commands.shared_run` partitions shared among processes,
:mod:`~relay.commands.relay_job` the Spark job's steps),
:mod:`~relay.commands.mirror` (the mirror), :mod:`~relay.commands.db` (migrations and
roles), :mod:`~relay.commands.status`, :mod:`~relay.commands.positions` and
:mod:`~relay.commands.dead_letters` (what ops run by hand). The CLI (:mod:`relay.cli`)
is a thin shell over these; the jobs in ``jobs/`` call them too.
"""
