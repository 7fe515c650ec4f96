"""The stores' side of transactional handlers (rota.transactional): one transaction per
attempt on a connection of the store's own database. The handler writes on the connection;
`succeed` records the run's success, token-checked, in the same transaction; the context
manager commits when the handler's block ends normally and rolls back when it raises.

Failures of rota's own statements: one that opens or begins the transaction (before the
handler runs) or records its success is raised as the store's DatabaseError (DatabaseTransient
for an outage); a transient one at the commit as CommitUnknown (the commit may or may not have happened: the
run's row tells, rota.transactional reads it back)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import ConfigurationError, DatabaseError, DatabaseTransient

if TYPE_CHECKING:
    pass

_ENDED = (
    "the handler ended ctx.connection's transaction itself (COMMIT or ROLLBACK): rota commits it "
    "together with the run's success, so a transactional handler must not; use SAVEPOINTs to undo part of it"
)


class RefusesToEnd:
    """Before a driver's connection class (SQLite's, MySQL's): a handler's connection whose
    commit() and rollback() refuse, the transaction is rota's."""

    def commit(self) -> None:
        raise ConfigurationError(_ENDED.replace("ended", "called commit() on"))

    def rollback(self) -> None:
        raise ConfigurationError(_ENDED.replace("ended", "called rollback() on"))


class CommitUnknown(DatabaseTransient):
    """The commit of a transactional handler's transaction failed transiently (a connection
    cut while committing): whether it committed is unknown until the run's row is read."""


def _commit_error(error: DatabaseError) -> DatabaseError:
    if isinstance(error, DatabaseTransient):
        return CommitUnknown(f"committing a transactional handler's transaction (outcome unknown): {error}")
    return DatabaseError(f"committing a transactional handler's transaction: {error}")
