"""CassieQ's accounts and their keys (spec §2.1), over the store port's ``account`` table.

An account is a name and a map of named keys; a new account gets ``primary`` and
``secondary``. A key is 64 random bytes, Base64url without padding (86 characters).
Creating an account is a lightweight transaction (IF NOT EXISTS, CAS-16); adding or
deleting a key rewrites the whole map after reading it, unguarded, as the original does
(two concurrent key changes can lose one). Deleting a key revokes every signature made
with it, since authentication only ever tries the keys in the map.

Randomness comes from the caller's source (``rt.random``; seeded in the sim world, so
keys there are reproducible, not secret; a live server passes ``random.SystemRandom()``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Protocol

from lab.backends.cassieq.core.errors import Conflict, InvalidName, NotFound
from lab.backends.cassieq.core.model import valid_name
from lab.backends.cassieq.core.store import CassStore

__all__ = ["AccountDefinition", "AccountExists", "AccountNotFound", "Accounts", "InvalidName", "KeyExists",
           "KeyNotFound", "new_key"]

TABLE = "account"
KEY_BYTES = 64
PRIMARY = "primary"
SECONDARY = "secondary"


class RandomBytes(Protocol):
    def randbytes(self, n: int) -> bytes: ...


class AccountNotFound(NotFound):
    """No such account (404). The original names every account lookup's operation
    ``DeleteAccount``; the permissions endpoint says ``CreateSignedAuthQuery``."""

    def __init__(self, account: str, operation: str = "DeleteAccount"):
        super().__init__(operation, f"The requested account '{account}' was not found.")
        self.account = account

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "account": self.account}


class KeyNotFound(NotFound):
    """No key by that name (the permissions endpoint's 404)."""

    def __init__(self, key_name: str, operation: str = "GenerateQueryAuth"):
        super().__init__(operation, f"The requested account key of '{key_name}' was not found.")
        self.key_name = key_name

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "key": self.key_name}


class AccountExists(Conflict):
    """409 on create."""

    def __init__(self, account: str):
        super().__init__("CreateAccount", f"An account named '{account}' already exists")
        self.account = account


class KeyExists(Conflict):
    """409 on add key."""

    def __init__(self, key_name: str):
        super().__init__("AddNewAccountKey", f"A key named '{key_name}' already exists.")
        self.key_name = key_name


def new_key(random: RandomBytes) -> str:
    return base64.urlsafe_b64encode(random.randbytes(KEY_BYTES)).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class AccountDefinition:
    account_name: str
    keys: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"accountName": self.account_name, "keys": dict(self.keys)}


def _definition(row: dict[str, Any]) -> AccountDefinition:
    return AccountDefinition(row["account_name"], dict(row.get("keys") or {}))


class Accounts:
    """Account operations on one store."""

    def __init__(self, store: CassStore, random: RandomBytes):
        self.store = store
        self.random = random

    async def create(self, name: str) -> AccountDefinition:
        """A new account with keys ``primary`` and ``secondary``; AccountExists if the name is taken."""
        name = valid_name(name, "account name")
        keys = {PRIMARY: new_key(self.random), SECONDARY: new_key(self.random)}
        if not await self.store.insert(TABLE, {"account_name": name, "keys": keys}, if_not_exists=True):
            raise AccountExists(name)
        return AccountDefinition(name, keys)

    async def get(self, name: str) -> AccountDefinition | None:
        row = await self.store.read(TABLE, {"account_name": name.strip()})
        return None if row is None else _definition(row)

    async def keys(self, name: str) -> dict[str, str] | None:
        """The account's key map, None if there is no such account: what ``auth.authenticate`` takes."""
        account = await self.get(name)
        return None if account is None else account.keys

    async def list(self) -> list[AccountDefinition]:
        """Every account, keys included, by name."""
        rows = await self.store.read_all(TABLE)
        return sorted((_definition(row) for row in rows), key=lambda account: account.account_name)

    async def delete(self, name: str) -> None:
        """Remove the account row; AccountNotFound if there is none. Its queues are the
        caller's to delete (the original does it in the background)."""
        name = name.strip()
        if await self.get(name) is None:
            raise AccountNotFound(name)
        await self.store.delete(TABLE, {"account_name": name})

    async def add_key(self, name: str, key_name: str) -> str:
        """A new random key under ``key_name``; KeyExists if the name is taken."""
        key_name = valid_name(key_name, "key name")
        account = await self._existing(name)
        if key_name in account.keys:
            raise KeyExists(key_name)
        key = new_key(self.random)
        await self._write_keys(account.account_name, {**account.keys, key_name: key})
        return key

    async def delete_key(self, name: str, key_name: str) -> None:
        """Revoke a key; a key that does not exist is no error."""
        account = await self._existing(name)
        key_name = key_name.strip()
        if key_name in account.keys:
            remaining = {k: v for k, v in account.keys.items() if k != key_name}
            await self._write_keys(account.account_name, remaining)

    async def signing_key(self, name: str, key_name: str) -> str:
        """The key the permissions endpoint signs query claims with (its two 404s)."""
        account = await self._existing(name, operation="CreateSignedAuthQuery")
        try:
            return account.keys[key_name.strip()]
        except KeyError:
            raise KeyNotFound(key_name.strip()) from None

    async def _existing(self, name: str, operation: str = "DeleteAccount") -> AccountDefinition:
        account = await self.get(name)
        if account is None:
            raise AccountNotFound(name.strip(), operation)
        return account

    async def _write_keys(self, name: str, keys: dict[str, str]) -> None:
        # read-modify-write of the whole map with no condition, as the original
        await self.store.update(TABLE, {"account_name": name}, {"keys": keys})
