"""The dashboard's settings. `dartfl dashboard` passes them to the Streamlit process in
environment variables, so the app (and AppTest) read them in one place."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dartfl.errors import ConfigError
from dartfl.paths import STORE_ENV, default_store_path
from dashboard.telemetry import Liveness
from messaging.security import MqttSecurity

__all__ = ["BROKER_ENV", "GONE_ENV", "SLO_TARGET_ENV", "STALE_ENV", "DashboardConfig"]

BROKER_ENV = "DARTFL_BROKER"
STALE_ENV = "DARTFL_DASHBOARD_STALE_S"
GONE_ENV = "DARTFL_DASHBOARD_GONE_S"
SLO_TARGET_ENV = "DARTFL_DASHBOARD_SLO_TARGET"
REFRESH_ENV = "DARTFL_DASHBOARD_REFRESH_S"


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    """Where the data comes from and when a device counts as stale, gone or missing its SLO.

    `slo_target` is the fraction of requests within the SLO below which a device stands out."""

    store_path: Path
    broker_url: str | None = None
    mqtt_security: MqttSecurity | None = None  # TLS files and login for an mqtts:// broker
    liveness: Liveness = field(default_factory=Liveness)
    slo_target: float = 0.95
    refresh_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0.0 < self.slo_target <= 1.0:
            raise ConfigError(f"SLO target must be in (0, 1], got {self.slo_target}")
        if self.refresh_s <= 0:
            raise ConfigError(f"refresh interval must be > 0 s, got {self.refresh_s}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DashboardConfig:
        env = os.environ if env is None else env

        def num(name: str, default: float) -> float:
            text = env.get(name)
            if not text:
                return default
            try:
                return float(text)
            except ValueError:
                raise ConfigError(f"{name}={text!r} is not a number") from None

        store = Path(env[STORE_ENV]).expanduser() if env.get(STORE_ENV) else default_store_path()
        security = MqttSecurity.from_env(env)
        return cls(
            store_path=store,
            broker_url=env.get(BROKER_ENV) or None,
            mqtt_security=None if security == MqttSecurity() else security,
            liveness=Liveness(num(STALE_ENV, 10.0), num(GONE_ENV, 60.0)),
            slo_target=num(SLO_TARGET_ENV, 0.95),
            refresh_s=num(REFRESH_ENV, 2.0),
        )

    def to_env(self) -> dict[str, str]:
        env = {
            STORE_ENV: str(self.store_path),
            STALE_ENV: repr(self.liveness.stale_after_s),
            GONE_ENV: repr(self.liveness.gone_after_s),
            SLO_TARGET_ENV: repr(self.slo_target),
            REFRESH_ENV: repr(self.refresh_s),
        }
        if self.broker_url:
            env[BROKER_ENV] = self.broker_url
        if self.mqtt_security is not None:
            env.update(self.mqtt_security.to_env())  # the password stays in $DARTFL_MQTT_PASSWORD
        return env
