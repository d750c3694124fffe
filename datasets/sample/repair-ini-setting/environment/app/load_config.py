"""Load and validate the service settings; prints "ok" when they are valid."""

import configparser
import sys

SETTINGS_PATH = "/app/service.ini"
LOG_LEVELS = ("debug", "info", "warning", "error")
KNOWN_KEYS = {
    "server": {"host", "port", "workers", "log_level"},
    "storage": {"path", "retention_days"},
}


def load(path: str = SETTINGS_PATH) -> dict:
    parser = configparser.ConfigParser()
    if not parser.read(path):
        raise ValueError(f"cannot read {path}")
    for section, keys in KNOWN_KEYS.items():
        if not parser.has_section(section):
            raise ValueError(f"missing section [{section}]")
        unknown = set(parser[section]) - keys
        if unknown:
            raise ValueError(f"unknown keys in [{section}]: {sorted(unknown)}")
        missing = keys - set(parser[section])
        if missing:
            raise ValueError(f"missing keys in [{section}]: {sorted(missing)}")
    server, storage = parser["server"], parser["storage"]
    settings = {
        "host": server["host"],
        "port": server.getint("port"),
        "workers": server.getint("workers"),
        "log_level": server["log_level"],
        "storage_path": storage["path"],
        "retention_days": storage.getint("retention_days"),
    }
    if not 1 <= settings["port"] <= 65535:
        raise ValueError(f"port out of range: {settings['port']}")
    if settings["log_level"] not in LOG_LEVELS:
        raise ValueError(f"log_level must be one of {LOG_LEVELS}, got {settings['log_level']!r}")
    return settings


if __name__ == "__main__":
    try:
        load()
    except ValueError as error:
        sys.exit(f"invalid settings: {error}")
    print("ok")
