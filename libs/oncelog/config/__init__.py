"""Settings from the environment: frozen dataclasses, every problem reported at once."""

from oncelog.config.settings import ConfigError, ServiceSettings, env_name, load_settings

__all__ = ["ConfigError", "ServiceSettings", "env_name", "load_settings"]
