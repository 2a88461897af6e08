"""Driver messages lose the password, and only the password (the Database handle's too): a
password that is also the user, database or host name is not masked where those names
appear."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from relay.errors import DatabaseUnreachableError
from relay.postgres.engine import open_database, translate
from relay.runtime.secrets import Secret


def _failure(message: str) -> OperationalError:
    return OperationalError("connect", {}, Exception(message))


def test_the_password_is_masked_wherever_it_appears() -> None:
    url = Secret("postgresql+psycopg://app:s3cret-pw@db:5432/orders")
    error = translate(_failure('FATAL: bad login "s3cret-pw" for user "app"'), url, "connecting")
    assert "s3cret-pw" not in str(error)
    assert 'user "app"' in str(error)


def test_a_password_equal_to_the_user_name_leaves_the_user_name_alone() -> None:
    url = Secret("postgresql+psycopg://relay:relay@db:5432/relay")
    error = translate(
        _failure('FATAL: password authentication failed for user "relay"'), url, "connecting"
    )
    assert 'user "relay"' in str(error)
    assert "postgresql+psycopg://relay:***@db:5432/relay" in str(error)


def test_the_database_handle_names_its_server_without_the_password() -> None:
    url = Secret("postgresql+psycopg://app:s3cret-pw@127.0.0.1:1/orders")
    database = open_database(url, pooled=False, application_name="relay-test")
    try:
        assert database.where == "postgresql+psycopg://app:***@127.0.0.1:1/orders"
        assert "s3cret-pw" not in repr(database)
        with pytest.raises(DatabaseUnreachableError) as refused, database.connect("connecting"):
            pass
        assert "s3cret-pw" not in str(refused.value)
        assert "127.0.0.1:1" in str(refused.value)
    finally:
        database.dispose()
