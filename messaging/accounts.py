"""Who may do what on the production broker: the roster of accounts by role, the ACL it
gives them (rendered from the shipped template messaging/mosquitto/acl.template), and, for a
refusal, which account and role would have the right.

Four roles (docs/deployment.md section 5): a **device** (its account's name is its device id),
a **requester** (sends requests to the roster's devices and reads its own replies under
dartfl/v1/_reply/<account>/), a **recorder** (`dartfl record`) and a **dashboard**. An account
has exactly one role. The roster is kept in the set-up's `setup.toml` (messaging.broker_setup),
so adding one account leaves the others as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from importlib import resources
from string import Template
from typing import Final, Literal, get_args

from dartfl.errors import ConfigError
from dartfl.protocol import REPLY_ROOT, ROOT, check_name, check_requester

__all__ = ["ROLES", "Role", "Roster", "grant_hint", "read_template", "render_acl"]

Role = Literal["device", "requester", "recorder", "dashboard"]
ROLES: Final[tuple[Role, ...]] = get_args(Role)
_ROLE_MARK: Final = "# role: "
_ACL_HEADER: Final = """\
# Written by `dartfl broker setup` from messaging/mosquitto/acl.template and the roster in
# setup.toml next to this file. Change the roster with that command, not this file.
"""


def read_template(name: str) -> str:
    """One of the shipped files in messaging/mosquitto/ (package data, also in a wheel)."""
    # This package by its own name: the wheel installs it as dartfl_messaging.
    package = __name__.rpartition(".")[0]
    return resources.files(package).joinpath("mosquitto", name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Roster:
    """The broker's accounts by role (sorted, each name once, one role per name)."""

    devices: tuple[str, ...] = ()
    requesters: tuple[str, ...] = ()
    recorders: tuple[str, ...] = ()
    dashboards: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        seen: dict[str, Role] = {}
        for role, names in zip(ROLES, self._lists(), strict=True):
            for name in names:
                # A requester's name is its reply namespace, a device's a topic level too.
                if role == "requester":
                    check_requester(name)
                else:
                    check_name("account", name)
                if name in seen and seen[name] != role:
                    raise ConfigError(
                        f"account {name!r} cannot be both a {seen[name]} and a {role}: an account "
                        "has one role (remove it first to change its role)"
                    )
                seen[name] = role
        for f, names in zip(fields(self), self._lists(), strict=True):
            object.__setattr__(self, f.name, tuple(sorted(set(names))))

    def _lists(self) -> tuple[tuple[str, ...], ...]:
        return (self.devices, self.requesters, self.recorders, self.dashboards)

    def by_role(self) -> dict[Role, tuple[str, ...]]:
        return dict(zip(ROLES, self._lists(), strict=True))

    @property
    def accounts(self) -> tuple[str, ...]:
        return tuple(name for names in self._lists() for name in names)

    def role_of(self, name: str) -> Role | None:
        return next((role for role, names in self.by_role().items() if name in names), None)

    def adding(self, new: Mapping[Role, Iterable[str]]) -> Roster:
        """This roster with the `new` accounts of each role (an existing one of another role is
        an error)."""
        lists = {f"{role}s": (*names, *new.get(role, ())) for role, names in self.by_role().items()}
        return replace(self, **lists)

    def removing(self, names: Iterable[str]) -> Roster:
        gone = set(names)
        unknown = sorted(gone - set(self.accounts))
        if unknown:
            raise ConfigError(f"cannot remove {', '.join(unknown)}: not in the roster ({self.summary()})")
        lists = {
            f"{role}s": tuple(n for n in names if n not in gone) for role, names in self.by_role().items()
        }
        return replace(self, **lists)

    def summary(self) -> str:
        counts = [
            f"{len(names)} {role}{'s' if len(names) != 1 else ''}" for role, names in self.by_role().items()
        ]
        return ", ".join(counts)

    def to_mapping(self) -> dict[str, list[str]]:
        """The roster as TOML-ready lists by role (`devices`, `requesters`, ...)."""
        return {f.name: list(names) for f, names in zip(fields(self), self._lists(), strict=True)}

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], source: str) -> Roster:
        """The roster in `data` (keys as `to_mapping` writes them; others are not looked at);
        ConfigError naming `source` and the problem."""
        lists: dict[str, tuple[str, ...]] = {}
        for f in fields(cls):
            value = data.get(f.name, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{source}: {f.name} must be a list of account names, got {value!r}")
            lists[f.name] = tuple(value)
        try:
            return cls(**lists)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


def _role_blocks(template: str) -> dict[Role, list[str]]:
    """The template's rule lines by role (comments and blank lines dropped)."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in template.splitlines():
        line = raw.strip()
        if line.startswith(_ROLE_MARK):
            current = blocks.setdefault(line.removeprefix(_ROLE_MARK).strip(), [])
        elif line and not line.startswith("#") and current is not None:
            current.append(line)
    if sorted(blocks) != sorted(ROLES):
        raise ConfigError(
            f"the ACL template has blocks for {sorted(blocks)}; expected one for each of {ROLES}"
        )
    return {role: blocks[role] for role in ROLES}


def render_acl(roster: Roster, template: str | None = None) -> str:
    """The broker's ACL file for `roster`: one block per account, its role's lines with
    `${account}` filled in, each `${device}` line once per device."""
    blocks = _role_blocks(read_template("acl.template") if template is None else template)
    out = [_ACL_HEADER]
    for role, names in roster.by_role().items():
        for account in names:
            out.append(f"# {role} {account}")
            for line in blocks[role]:
                rule = Template(line)
                if "${device}" in line:
                    out += [rule.substitute(account=account, device=device) for device in roster.devices]
                else:
                    out.append(rule.substitute(account=account))
            out.append("")
    return "\n".join(out)


def grant_hint(right: Literal["read", "write"], topic: str, account: str | None) -> str:
    """Which account of which role has `right` on `topic` under the shipped ACL, and the
    `dartfl broker setup` flags that make it so (a fix to print beside a refusal)."""
    me = account or "ACCOUNT"
    levels = topic.split("/")
    if topic.startswith(f"{REPLY_ROOT}/") and len(levels) > 3:
        owner = levels[3]
        who, flags = (
            ("device accounts write replies", f"--device {me}")
            if right == "write"
            else (f"only requester {owner!r} reads them, so log in as {owner!r}", f"--requester {owner}")
        )
    elif topic.startswith(f"{ROOT}/") and len(levels) >= 4:
        device, kind = levels[2], levels[3]
        if kind == "req" and right == "write":
            who, flags = "requesters write requests", f"--requester {me} --device {device}"
        elif kind == "req" or right == "write":
            who, flags = f"only device {device!r} may, so log in as {device!r}", f"--device {device}"
        elif device != "+":
            who, flags = "requesters watch their devices", f"--requester {me} --device {device}"
        elif kind == "status":
            who, flags = "dashboards read every status", f"--dashboard {me}"
        else:
            who, flags = "recorders (and dashboards) read all telemetry", f"--recorder {me}"
    else:
        return "docs/deployment.md section 5 lists each role's rights"
    return f"{who}: `dartfl broker setup {flags}`, then reload the broker (docs/deployment.md section 5)"
