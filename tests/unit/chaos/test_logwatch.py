"""Reading the logs of processes under test: texts that appear, partitions fenced."""

from __future__ import annotations

from pathlib import Path

from relay.chaos.logwatch import (
    Fenced,
    LogReader,
    appears_from_now,
    reader_from_now,
    relay_holdings,
    relay_partitions_fenced,
    source_holdings,
    source_partitions_fenced,
)
from relay.publishing.partition_relay import READY as RELAY_READY
from relay.replication.startup import READY as REPLICA_READY

RELAY = f"{RELAY_READY}; resuming after seq "  # then the position
COPY = f"{REPLICA_READY}; copying from offset "


def test_partitions_fenced_by_a_relay_and_by_a_replicator() -> None:
    relay = f"x relay partition 3: {RELAY}7\nx relay partition 1: published\n".encode()
    assert relay_partitions_fenced(relay) == {"3"}
    replicator = (
        f"INFO relay.replication.partition_replicator: chaos-accounts[2]: {COPY}78\n"
        "INFO x: chaos-accounts[0]: start-up failed\n"
        f"INFO y: dr.t[10]: {COPY}0\n"
    ).encode()
    assert source_partitions_fenced(replicator) == {"chaos-accounts[2]", "dr.t[10]"}


def test_fenced_finds_distinct_partitions_across_partial_lines(tmp_path: Path) -> None:
    log = tmp_path / "replicator.log"
    log.write_bytes(f"a[0]: {COPY}1\na[1]: {REPLICA_READY}; copy".encode())
    fenced = Fenced(LogReader(log), source_partitions_fenced)
    assert fenced() == {"a[0]"}
    with log.open("ab") as out:
        out.write(f"ing from offset 5\na[0]: {COPY}9\n".encode())
    assert fenced() == {"a[0]", "a[1]"}


def test_fenced_from_now_ignores_earlier_fences(tmp_path: Path) -> None:
    log = tmp_path / "relay.log"
    log.write_bytes(f"relay partition 1: {RELAY}4\n".encode())
    fenced = Fenced(reader_from_now(log), relay_partitions_fenced)
    assert fenced() == set()
    with log.open("ab") as out:
        out.write(f"relay partition 2: {RELAY}9\n".encode())
    assert fenced() == {"2"}


def test_the_partitions_a_sharing_relay_holds() -> None:
    log = (
        "x relay.commands.shared_run: taking relay partitions [0, 1, 2, 3]\n"
        f"x relay partition 2: {RELAY}0\n"
        "x relay partition 2 released: relay partition 2: fenced 0.0 s into a "
        "transaction; the others go on\n"
        "x lost relay partitions [3]: the members group moved on without this process\n"
        "x handing relay partitions [0] on\n"
        "x taking relay partitions [3]\n"
    ).encode()
    assert relay_holdings(log) == {"1", "3"}
    back = log + b"x relay partition 2: still assigned here, taking it back\n"
    assert relay_holdings(back) == {"1", "2", "3"}
    assert relay_holdings(b"x handing relay partitions [1, 2, 3] on\n" + back) == {"1", "2", "3"}


def test_a_relay_that_never_took_partitions_holds_what_it_fenced() -> None:
    log = f"relay partition 0: {RELAY}1\nrelay partition 3: {RELAY}2\n".encode()
    assert relay_holdings(log) == {"0", "3"}
    assert relay_holdings(b"") == set()


def test_appears_from_now_ignores_what_the_log_already_holds(tmp_path: Path) -> None:
    log = tmp_path / "mirror.log"
    log.write_bytes(b"assigned [0]\n")
    appeared = appears_from_now(log, "assigned ")
    assert not appeared()
    with log.open("ab") as out:
        out.write(b"assig")
    assert not appeared()
    with log.open("ab") as out:
        out.write(b"ned [1]\n")
    assert appeared()


def test_the_partitions_a_sharing_replicator_holds() -> None:
    log = (
        "x relay.commands.shared_run: taking source partitions [t[0], t.x[1], t[2]]\n"
        f"x t[2]: {COPY}0\n"
        "x relay.commands.shared_run: source partition t[2] released: t[2]: fenced 0.0 s "
        "into a transaction, before transaction.timeout.ms: another replicator instance "
        "took this partition over; this instance stops; the others go on\n"
        "x lost target partitions [dr.t[0]]: the members group moved on without this process\n"
        "x handing source partitions [t[0]] on\n"
        "x t[3]: new source partition, copying it to dr.t\n"
    ).encode()
    assert source_holdings(log) == {"t.x[1]"}
    back = log + b"x source partition t[2]: still assigned here, taking it back\n"
    assert source_holdings(back) == {"t.x[1]", "t[2]"}
    assert source_holdings(f"t[4]: {COPY}1\n".encode()) == {"t[4]"}  # never shared
