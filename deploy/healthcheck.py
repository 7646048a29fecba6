"""The image's HEALTHCHECK: exit 0 when the node answers `GET /health` with 200, else 1.

The node serves /health on every HTTP listener; this asks the first one in `listeners` (from
TRIBUTARY_LISTENERS, else the properties file), on 127.0.0.1 when it listens on every interface.
Standard library only (no curl in the image), and no project import, so a check costs little.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.error
import urllib.request

CONFIG_PATH = "/etc/tributary/server.properties"
TIMEOUT_S = 2.0


def _setting(key: str, config_path: str, environ: dict[str, str]) -> str | None:
    """`key` from its TRIBUTARY_ variable, else from the properties file."""
    value = environ.get("TRIBUTARY_" + key.upper().replace(".", "_"))
    if value is None:
        with open(config_path, encoding="utf-8") as config:
            for line in config:
                match = re.fullmatch(rf"\s*{re.escape(key)}\s*[=:]\s*(.*?)\s*", line)
                if match:
                    value = match.group(1)
    return value


def first_listener(config_path: str, environ: dict[str, str]) -> tuple[str, int]:
    """(host, port) of the first listener speaking HTTP (a PLAINTEXT one speaks Kafka's protocol, by
    name or by listener.security.protocol.map); a wildcard host becomes 127.0.0.1."""
    listeners = _setting("listeners", config_path, environ) or "PLAINTEXT://127.0.0.1:9092,HTTP://127.0.0.1:9192"
    protocols = dict(entry.strip().upper().partition(":")[::2]
                     for entry in (_setting("listener.security.protocol.map", config_path, environ) or "").split(",")
                     if ":" in entry)
    for match in re.finditer(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:,]*):(\d+)", listeners):
        name = match.group(1).upper()
        if protocols.get(name, "PLAINTEXT" if name == "PLAINTEXT" else "HTTP") == "HTTP":
            host = match.group(2)
            return ("127.0.0.1" if host in ("", "0.0.0.0", "[::]") else host), int(match.group(3))
    raise ValueError(f"listeners={listeners!r} has no HTTP listener")


def main() -> int:
    host, port = first_listener(CONFIG_PATH, dict(os.environ))
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=TIMEOUT_S) as response:
            print(response.read().decode(errors="replace"))
            return 0
    except urllib.error.HTTPError as error:  # 503 with the reason in the body
        print(f"{error.code}: {error.read().decode(errors='replace')}")
    except OSError as error:
        print(f"no answer from {host}:{port}: {error}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
