"""Shared fixtures: the PostgreSQL server and Kafka broker the integration tests run against.

By default ``relay.devenv.up()`` starts (or reuses) the local development servers in
``<rootdir>/.relay-dev`` (or ``$RELAY_DEV_DIR``); they are left running for the next run
(``python -m relay.devenv down`` stops them, as does ``RELAY_TEST_STOP_SERVICES=1``).
Set ``RELAY_TEST_DATABASE_URL`` and ``RELAY_TEST_KAFKA_BOOTSTRAP_SERVERS`` to test against
servers of your own instead; the database role must be allowed to CREATE DATABASE. The tests
that need a second, independent Kafka cluster use the development one (``relay dev up``
starts it too) or ``RELAY_TEST_TARGET_KAFKA_BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from relay import devenv
from relay.devenv import Endpoints, SaslEndpoint
from relay.devenv.databases import ScratchDatabases
from relay.devenv.topics import create_topic, delete_topics, unique_name
from tests.workers import exclusive, is_worker, runs_workers

pytest_plugins = ["tests.parallel"]

_INTEGRATION_DIR = Path(__file__).resolve().parent / "integration"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: needs the real PostgreSQL server and Kafka broker"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION_DIR in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.integration)


def _external_endpoints() -> Endpoints | None:
    db = os.environ.get("RELAY_TEST_DATABASE_URL", "")
    kafka = os.environ.get("RELAY_TEST_KAFKA_BOOTSTRAP_SERVERS", "")
    if bool(db) != bool(kafka):
        raise pytest.UsageError(
            "set both RELAY_TEST_DATABASE_URL and RELAY_TEST_KAFKA_BOOTSTRAP_SERVERS, or neither"
        )
    if not db:
        return None
    return Endpoints(database_url=db, bootstrap_servers=kafka, admin_database_url=db)


@pytest.fixture(scope="session")
def devenv_workdir(pytestconfig: pytest.Config) -> Path | None:
    """Working directory of the local development servers, or None when the tests run
    against external servers (``RELAY_TEST_*`` set)."""
    if _external_endpoints() is not None:
        return None
    return _default_workdir(pytestconfig)


def _default_workdir(config: pytest.Config) -> Path:
    if os.environ.get("RELAY_DEV_DIR"):
        return devenv.resolve_workdir()
    return devenv.resolve_workdir(config.rootpath / ".relay-dev")


@pytest.fixture(scope="session")
def endpoints(request: pytest.FixtureRequest, devenv_workdir: Path | None) -> Iterator[Endpoints]:
    external = _external_endpoints()
    if external is not None:
        yield external
        return
    with exclusive(_up_lock(devenv_workdir)):  # workers start (or reuse) them one at a time
        started = devenv.up(devenv_workdir)
    yield started
    if _stop_services() and not is_worker(request.config):
        devenv.down(devenv_workdir)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """``RELAY_TEST_STOP_SERVICES=1`` with xdist: the controller stops the servers once every
    worker is done."""
    if _stop_services() and runs_workers(session.config) and _external_endpoints() is None:
        devenv.down(_default_workdir(session.config))


def _stop_services() -> bool:
    return os.environ.get("RELAY_TEST_STOP_SERVICES") == "1"


def _up_lock(workdir: Path | None) -> Path:
    return (workdir or devenv.resolve_workdir()) / "tests-up.lock"


@pytest.fixture(scope="session")
def bootstrap_servers(endpoints: Endpoints) -> str:
    return endpoints.bootstrap_servers


@pytest.fixture(scope="session")
def sasl_endpoint(endpoints: Endpoints) -> SaslEndpoint:
    """The broker's SASL_PLAINTEXT listener (PLAIN mechanism) and a login that it accepts:
    the dev broker's, or ``RELAY_TEST_KAFKA_SASL_BOOTSTRAP_SERVERS`` with
    ``RELAY_TEST_KAFKA_SASL_USERNAME``/``RELAY_TEST_KAFKA_SASL_PASSWORD`` (the same broker
    as ``RELAY_TEST_KAFKA_BOOTSTRAP_SERVERS``, reached through a SASL listener)."""
    names = ("BOOTSTRAP_SERVERS", "USERNAME", "PASSWORD")
    given = [os.environ.get(f"RELAY_TEST_KAFKA_SASL_{name}", "") for name in names]
    if any(given):
        if not all(given):
            raise pytest.UsageError(
                "set all of RELAY_TEST_KAFKA_SASL_BOOTSTRAP_SERVERS, "
                "RELAY_TEST_KAFKA_SASL_USERNAME and RELAY_TEST_KAFKA_SASL_PASSWORD, or none"
            )
        return SaslEndpoint(*given)
    if endpoints.sasl is not None:
        return endpoints.sasl
    if _external_endpoints() is not None:
        pytest.skip(
            "RELAY_TEST_KAFKA_BOOTSTRAP_SERVERS is an external broker without SASL info: set "
            "RELAY_TEST_KAFKA_SASL_BOOTSTRAP_SERVERS, _USERNAME and _PASSWORD (SASL_PLAINTEXT, "
            "PLAIN) to run the SASL tests"
        )
    pytest.skip("the development broker has no SASL listener (restart it: relay dev up)")


@pytest.fixture(scope="session")
def target_bootstrap_servers(endpoints: Endpoints) -> str:
    """``bootstrap.servers`` (PLAINTEXT) of a second Kafka cluster, independent of the one
    of ``bootstrap_servers`` (e.g. a replication target): the development environment's, or
    ``RELAY_TEST_TARGET_KAFKA_BOOTSTRAP_SERVERS``."""
    given = os.environ.get("RELAY_TEST_TARGET_KAFKA_BOOTSTRAP_SERVERS", "")
    if given:
        return given
    if endpoints.target_bootstrap_servers is not None:
        return endpoints.target_bootstrap_servers
    pytest.skip(
        "RELAY_TEST_KAFKA_BOOTSTRAP_SERVERS is an external broker: set "
        "RELAY_TEST_TARGET_KAFKA_BOOTSTRAP_SERVERS (a second, independent cluster) to run "
        "the tests that need two Kafka clusters"
    )


@pytest.fixture
def make_database(endpoints: Endpoints) -> Iterator[Callable[[], str]]:
    """Creates fresh, empty databases, each dropped after the test; returns its URL.

    Where the admin role may create roles (always with the local servers), each database is
    owned by a fresh role of its own that the URL logs in as, dropped with the database."""
    databases = ScratchDatabases(endpoints.admin_database_url, endpoints.database_url)
    yield databases.create
    databases.drop_all()


@pytest.fixture
def database_url(make_database: Callable[[], str]) -> str:
    """SQLAlchemy URL of a fresh, empty database that is dropped after the test."""
    return make_database()


@pytest.fixture(scope="session")
def kafka_admin(bootstrap_servers: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap_servers})


@pytest.fixture(scope="session")
def target_kafka_admin(target_bootstrap_servers: str) -> AdminClient:
    """An admin client of the second Kafka cluster (``target_bootstrap_servers``)."""
    return AdminClient({"bootstrap.servers": target_bootstrap_servers})


@pytest.fixture
def make_topic(kafka_admin: AdminClient) -> Iterator[Callable[..., str]]:
    """``make_topic(name=None, partitions=1) -> str`` creates a topic and waits until every
    partition has a leader. ``name`` is a prefix: a unique suffix is always appended, so
    reruns against a reused broker never collide. Topics are deleted after the test."""
    yield from _topic_maker(kafka_admin)


@pytest.fixture
def make_target_topic(target_kafka_admin: AdminClient) -> Iterator[Callable[..., str]]:
    """:func:`make_topic` for the second Kafka cluster (``target_bootstrap_servers``)."""
    yield from _topic_maker(target_kafka_admin)


def _topic_maker(kafka_admin: AdminClient) -> Iterator[Callable[..., str]]:
    created: list[str] = []

    def make(
        name: str | None = None, partitions: int = 1, config: dict[str, str] | None = None
    ) -> str:
        topic = create_topic(kafka_admin, unique_name(name or "test"), partitions, config)
        created.append(topic)
        return topic

    yield make
    delete_topics(kafka_admin, created)
