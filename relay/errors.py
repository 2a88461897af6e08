"""The one exception tree of the package, with the exit codes the CLI returns.

Every error raised on purpose derives from :class:`RelayError`, in every direction and
tool. The CLI (and a Spark job's driver) turns one into a single line on stderr and its
``exit_code``; tracebacks only with ``--traceback``. Errors that wrap a driver error keep
the driver's code.

Exit codes: 1 a run failed (:class:`RelayError`), 2 configuration, 3 database, 4 Kafka,
5 another instance owns the work (fenced, offset conflict), 6 a ``relay status`` check
failed (its report is printed all the same).

::

    RelayError (1)
    ├── ConfigurationError (2)
    │   ├── PositionsMismatchError     positions that do not fit this database
    │   ├── MirroredTopicChangedError  stored mirror offsets that do not fit the topic
    │   ├── OffsetTranslationError     a group's offsets cannot be moved to the target
    │   └── ConfirmationRequiredError  a command that needs --yes ran without it
    ├── DatabaseError (3)
    │   ├── DatabaseUnreachableError
    │   └── MigrationsNotAppliedError
    ├── KafkaError (4)
    │   ├── BrokerUnreachableError
    │   ├── OffsetOutOfRangeError      a consumer's offset is not in the log
    │   ├── KafkaAuthenticationError
    │   └── ProducerFencedError (5)
    ├── RetriableError                 try the same work again
    │   ├── AmbiguousCommitError       a transaction's outcome unknown: rebuild, re-read
    │   ├── TransactionTimedOutError   the broker aborted a batch for its age: retry smaller
    │   ├── RecordMayHealError         a record refused for now (e.g. parent not there yet)
    │   └── TopicMissingError
    ├── InvalidEventError              an event the write API cannot store
    │   └── SerializationError         a value its registry schema refuses, or not registered
    ├── SchemaRegistryError            the schema registry refused (auth, bad schema)
    │   └── SchemaRegistryUnavailableError  unreachable or failing (also a RetriableError)
    ├── UnsupportedBindError           the write API cannot write through this object
    ├── GaveUpError                    retries exhausted
    ├── UndeliverableEventError        Kafka refuses rows for good: dead-letter them
    ├── DecodeError                    a record the mirror cannot map: dead-letter it
    ├── MirrorOffsetConflict (5)
    ├── StatusCheckError (6)           `relay status --max-lag/--max-age` found a breach
    ├── DeadLetterError                `relay dead-letters`: an unknown id, a failed replay
    ├── FailpointError                 a test's failpoint fired
    ├── DevEnvError                    a development server failed
    └── ChaosError                     a chaos run could not reach a verdict
        ├── CheckerError
        ├── DrainError
        └── FaultSkipped
"""

from __future__ import annotations


class RelayError(Exception):
    """Root of every error the relay raises on purpose."""

    exit_code: int = 1


class ConfigurationError(RelayError):
    """A setting is missing, malformed or unknown."""

    exit_code = 2


class PositionsMismatchError(ConfigurationError):
    """The positions in Kafka do not fit this database: committed for another database or
    by relays with another prefix, beyond what it assigned, or below what it recorded as
    published (the positions group's offsets expired or were deleted)."""


class MirroredTopicChangedError(ConfigurationError):
    """The mirror's stored offsets do not fit a mapped topic as it is in Kafka: they were
    taken from another topic of the same name (deleted and created again: another topic
    id), or the topic has more partitions than when they were stored while a table it
    feeds takes its versions from Kafka offsets. Nothing was applied; the message names
    the way out (docs/mirror.md)."""


class ReplicaPositionError(ConfigurationError):
    """A replicated partition's position on the target cluster was committed for another
    source (another source cluster or topic replicated into the same target topic), or
    lies beyond the source partition's end. Nothing was copied; the message says which."""


class TargetTopicError(ConfigurationError):
    """A target topic cannot take its source topic's records as they are: it exists
    with fewer partitions than the source (records would change partition) and holds no
    position of this replicator, or it is the source topic itself."""


class OffsetTranslationError(ConfigurationError):
    """``relay replicate --translate-group`` cannot move a consumer group's offsets to
    the target as asked: the group has active members on the target, a target record is
    not a copy of its source partition, or partitions are not replicated up to the
    group's offsets yet (the others were applied; run it again once the replicator has
    caught up). The message says which."""


class ConfirmationRequiredError(ConfigurationError):
    """A command that changes what is published or applied (``relay positions set``,
    ``relay dead-letters replay|discard``) ran without ``--yes``: it printed what it would
    do and changed nothing."""


class DatabaseError(RelayError):
    """PostgreSQL refused or could not be reached. ``sqlstate`` is the server's code."""

    exit_code = 3

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class DatabaseUnreachableError(DatabaseError):
    """No connection to PostgreSQL could be made."""


class MigrationsNotAppliedError(DatabaseError):
    """The database schema is not at the revision this relay needs."""


class KafkaError(RelayError):
    """The Kafka broker refused or could not be reached. ``code`` is librdkafka's name."""

    exit_code = 4

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class BrokerUnreachableError(KafkaError):
    """No broker answered within the time allowed."""


class OffsetOutOfRangeError(KafkaError):
    """A consumer's position is not in the partition's log (deleted by retention, or the
    topic was created again): librdkafka would otherwise reset it."""

    def __init__(self, message: str, topic: str, partition: int, code: str | None = None) -> None:
        super().__init__(message, code)
        self.topic = topic
        self.partition = partition


class KafkaAuthenticationError(KafkaError):
    """The broker refused the client's login (SASL or SSL handshake, credentials)."""


class ProducerFencedError(KafkaError):
    """Another relay instance took over this relay partition; this instance must stop.
    (The producer sees a transaction that outlasted ``transaction.timeout.ms`` the same
    way; the relay tells the two apart by the transaction's age:
    :class:`TransactionTimedOutError`.)"""

    exit_code = 5


class RetriableError(RelayError):
    """A transient failure; the same work may be tried again."""


class AmbiguousCommitError(RetriableError):
    """The producer no longer knows how its transaction ended: a commit or an abort timed
    out, or the producer refuses to begin another (librdkafka's ``_STATE``/``_CONFLICT``).
    The batch may or may not be committed. The producer is unusable: the relay drops it,
    builds a new one with the same ``transactional.id`` (whose ``init_transactions()``
    settles the pending transaction on the broker) and reads the position again."""


class TransactionTimedOutError(RetriableError):
    """A batch's Kafka transaction was open for ``transaction.timeout.ms`` or longer and the
    broker aborted it (and fenced the producer). Nothing of it is visible: the relay
    rebuilds the producer, fences, reads the position again and retries with smaller
    batches (relay.runtime.batch_limits)."""


class RecordMayHealError(RetriableError):
    """The database refused a record with an error that retrying the same record can
    cure (a foreign key whose parent has not arrived yet); the batch was rolled back."""


class TopicMissingError(RetriableError):
    """A destination topic does not exist (or this relay may not write to it); its rows
    wait in the outbox for ``--missing-topic-wait``, then become dead letters.
    ``outbox_ids``: the rows of the failed batch for ``topic`` (empty: not known)."""

    def __init__(
        self, message: str, topic: str = "", outbox_ids: tuple[int, ...] = (), reason: str = ""
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.outbox_ids = outbox_ids
        self.reason = reason or message  # for the dead letters, without the relay partition


class UndeliverableEventError(RelayError):
    """Kafka refuses these outbox rows for good (e.g. larger than the size limit)."""

    def __init__(self, message: str, outbox_ids: tuple[int, ...], reason: str) -> None:
        super().__init__(message)
        self.outbox_ids = outbox_ids
        self.reason = reason


class MirrorOffsetConflict(RelayError):
    """The stored offset of a Kafka partition moved under this mirror instance.

    Another consumer of the same group applied the partition since this instance read
    the offset (a rebalance took the partition away, or a duplicate Spark task ran). The
    batch was rolled back; the instance must re-read the offset from the database."""

    exit_code = 5

    def __init__(self, message: str, topic: str, partition: int, expected: int | None) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.expected = expected


class InvalidEventError(RelayError, ValueError):
    """An event cannot be written to the outbox as given (also a ValueError)."""


class SerializationError(InvalidEventError):
    """An event key or value cannot be serialized with its schema registry format: it does
    not fit the schema, or the schema is not registered under its subject (and
    ``auto.register.schemas`` is off). Nothing was written."""


class SchemaRegistryError(RelayError):
    """The schema registry refused a request (credentials, an invalid or incompatible
    schema). The message names the registry with its password masked."""


class SchemaRegistryUnavailableError(SchemaRegistryError, RetriableError):
    """The schema registry could not be reached or failed (connection refused, a timeout,
    HTTP 5xx) after the client's retries. The same work may be tried again later; the
    write API wrote nothing."""


class UnsupportedBindError(RelayError, TypeError):
    """The write API cannot add events to the caller's transaction through this object (also
    a TypeError): a type it does not know, an asynchronous session or connection given to
    the synchronous functions (or the reverse), or a connection in autocommit mode outside
    a transaction."""


class GaveUpError(RelayError):
    """A batch kept failing with retriable errors until the retry policy gave up."""


class DecodeError(RelayError):
    """Why a Kafka record cannot be mapped to rows; becomes the dead letter's error text."""


class StatusCheckError(RelayError):
    """A ``relay status`` check failed: a relay partition has more rows pending than
    ``--max-lag`` or an older pending row than ``--max-age``, or a mirror partition lags
    more than ``--max-lag``. The message names each breach; the report was printed."""

    exit_code = 6


class DeadLetterError(RelayError):
    """``relay dead-letters`` did not do all it was asked: an id that is not a dead letter,
    or replays that failed again (each dead letter kept, with its new error)."""


class FailpointError(RelayError):
    """Raised by a failpoint whose action is ``raise`` (crash and zombie tests)."""


class DevEnvError(RelayError, RuntimeError):
    """A development server could not be set up, started, reached or stopped."""


class ChaosError(RelayError):
    """The chaos run could not finish (no verdict on the relay)."""


class CheckerError(ChaosError):
    """The checker could not read its evidence (not an anomaly: no verdict)."""


class DrainError(ChaosError):
    """The final drain of a chaos run did not finish in time."""


class FaultSkipped(ChaosError):
    """A fault could not be injected (its target never came up in time)."""
