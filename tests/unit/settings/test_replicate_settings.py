import pytest

from relay.errors import ConfigurationError
from relay.settings.replicate import TopicSelection, load_replicate_settings

BASE = {
    "RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS": "east:9092",
    "RELAY_REPLICATE_TARGET_BOOTSTRAP_SERVERS": "dr:9092",
    "RELAY_REPLICATE_TOPICS": "orders, payments",
}


def test_each_cluster_has_its_own_connection_and_flags_win() -> None:
    env = {
        **BASE,
        "RELAY_REPLICATE_SOURCE_PROPERTIES": "security.protocol=SASL_SSL;sasl.password=east-pw",
        "RELAY_REPLICATE_TARGET_PROPERTIES": "security.protocol=SSL",
        "RELAY_REPLICATE_BATCH_SIZE": "100",
    }
    settings = load_replicate_settings(
        {
            "replicate_batch_size": 7,
            "replicate_target_bootstrap_servers": "dr2:9092",
            "replicate_target_properties": ["linger.ms=5"],
        },
        environ=env,
    )
    assert settings.source.client_config() == {
        "bootstrap.servers": "east:9092",
        "security.protocol": "SASL_SSL",
        "sasl.password": "east-pw",
    }
    assert settings.target.client_config() == {
        "bootstrap.servers": "dr2:9092",
        "security.protocol": "SSL",
        "linger.ms": "5",
    }
    assert settings.batch_size == 7
    assert settings.selection.topics == ("orders", "payments")
    assert settings.group_name is None  # the default: resolved once the clusters answer
    resolved = settings.with_group("relay-replicate-abc")
    assert resolved.transactional_id("eu.orders", 3) == "relay-replicate-abc-eu.orders-3"
    shown = repr(settings) + str(settings.describe())
    assert "east-pw" not in shown


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"RELAY_REPLICATE_SOURCE_BOOTSTRAP_SERVERS": None}, "RELAY_REPLICATE_SOURCE_BOOTSTRAP"),
        ({"RELAY_REPLICATE_TARGET_BOOTSTRAP_SERVERS": None}, "--target-bootstrap-servers"),
        ({"RELAY_REPLICATE_TOPICS": None}, "no topics to replicate"),
        ({"RELAY_REPLICATE_TOPIC_PATTERN": "orders[("}, "not a regular expression"),
        ({"RELAY_REPLICATE_TOPICS": "__consumer_offsets"}, "internal topic"),
        ({"RELAY_REPLICATE_BATCH_SIZE": "0"}, "RELAY_REPLICATE_BATCH_SIZE"),
        ({"RELAY_REPLICATE_TARGET_PROPERTIES": "transactional.id=x"}, "transactional.id"),
        ({"RELAY_REPLICATE_SOURCE_PROPERTIES": "auto.offset.reset=latest"}, "auto.offset.reset"),
        ({"RELAY_REPLICATE_SOURCE_PROPERTIES": "isolation.level=read_uncommitted"}, "isolation"),
    ],
)
def test_bad_settings_are_one_clear_error(change: dict[str, str | None], message: str) -> None:
    env = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_replicate_settings(environ=env)


def test_selection_by_list_and_pattern_and_the_rename() -> None:
    selection = TopicSelection(("orders",), r"eu\..*", "dr.")
    assert selection.selects("orders")
    assert selection.selects("eu.payments")
    assert not selection.selects("eu")  # the whole name must match
    assert not TopicSelection((), ".*").selects("__consumer_offsets")
    assert not selection.selects("payments")
    assert selection.target_topic("orders") == "dr.orders"


def test_the_members_group_follows_the_transactional_id_prefix() -> None:
    """Only instances that fence each other (the same prefix) may share the partitions."""
    settings = load_replicate_settings(
        environ={
            **BASE,
            "RELAY_REPLICATE_GROUP": "dr",
            "RELAY_REPLICATE_MEMBER_SESSION_TIMEOUT_MS": "6000",
        }
    )
    assert settings.members_group == "dr.members"
    assert settings.member_session_timeout_ms == 6000
    assert not settings.fence_members
    other = load_replicate_settings(
        {"replicate_fence_members": True},
        environ={
            **BASE,
            "RELAY_REPLICATE_GROUP": "dr",
            "RELAY_REPLICATE_TRANSACTIONAL_ID_PREFIX": "dr-b",
        },
    )
    assert other.members_group == "dr-b.members"
    assert other.fence_members
