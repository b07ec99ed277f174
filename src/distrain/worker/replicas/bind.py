"""TorchFT's manager server listening on the job's address only, not on every interface.

TorchFT 0.2.0's ``Manager.__init__`` (torchft/manager.py) starts rank 0's ``ManagerServer``
(Rust, ``torchft._torchft``) with ``bind=f"[::]:{port}"``: every interface, IPv4 and IPv6
(``ss -ltnp`` showed ``*:<port>`` for each group's rank 0 of a one-node ``--replicas`` job).
Neither an argument nor an environment variable chooses the address (``TORCHFT_MANAGER_PORT``
chooses only the port), and the Rust class cannot be subclassed ("type 'builtins.ManagerServer'
is not an acceptable base type").  So, for the time one ``Manager`` is built, the name
``torchft.manager`` looks the class up by is swapped for a function that keeps every argument
but puts the job's address in front of the port.  Listed in docs/torch_internals.md ("torchft");
``tests/jobs/test_listeners.py`` fails if a torchft upgrade bypasses it.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterator
from typing import Any

from distrain.errors import DistrainError
from distrain.process import patching


def host_port(host: str, port: str | int) -> str:
    """``host:port`` as a socket address: an IPv6 address in brackets."""
    try:
        v6 = ipaddress.ip_address(host).version == 6
    except ValueError:  # a name, not an address
        v6 = False
    return f"[{host}]:{port}" if v6 else f"{host}:{port}"


@contextlib.contextmanager
def manager_server_on(host: str) -> Iterator[None]:
    """Within: a ``torchft.Manager`` being built starts its ManagerServer on `host` only."""
    import torchft.manager as tm

    original = tm.ManagerServer

    def bound(*args: Any, **kwargs: Any) -> Any:
        bind = kwargs.get("bind")
        if not isinstance(bind, str) or ":" not in bind:
            # a torchft that builds its server differently: refuse rather than listen everywhere
            raise DistrainError(
                "torchft.Manager no longer passes bind='host:port' to ManagerServer "
                f"(got {bind!r}); "
                "distrain cannot keep its listener on the job's address (see "
                "worker/replicas/bind.py)"
            )
        kwargs["bind"] = host_port(host, bind.rsplit(":", 1)[1])
        return original(*args, **kwargs)

    with patching.temporarily(tm, "ManagerServer", bound, feature="replicas"):
        yield
