"""The image's HEALTHCHECK: exit 0 when the node answers `GET /health` with 200, else 1.

The node serves /health on every listener; this asks the first one in `listeners` (from
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


def first_listener(config_path: str, environ: dict[str, str]) -> tuple[str, int]:
    """(host, port) of the first entry of `listeners`; a wildcard host becomes 127.0.0.1."""
    listeners = environ.get("TRIBUTARY_LISTENERS")
    if listeners is None:
        with open(config_path, encoding="utf-8") as config:
            for line in config:
                match = re.fullmatch(r"\s*listeners\s*[=:]\s*(.*?)\s*", line)
                if match:
                    listeners = match.group(1)
    match = re.match(r"\s*[A-Za-z0-9_]+://(\[[^\]]*\]|[^:,]*):(\d+)", listeners or "PLAINTEXT://127.0.0.1:9092")
    if match is None:
        raise ValueError(f"listeners={listeners!r} is not NAME://host:port,...")
    host = match.group(1)
    return ("127.0.0.1" if host in ("", "0.0.0.0", "[::]") else host), int(match.group(2))


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
