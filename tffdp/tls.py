"""Mutual TLS between `tffdp.run --workers` and `tffdp.worker`: certificates and relay.

TFF's C++ worker serves plain gRPC and runs any computation sent to it. A worker
started with `--tls-cert/--tls-key/--tls-ca` therefore keeps the binary where only it
can reach it (`tffdp.confined_worker`: its own network namespace and a Unix socket) and
serves the port through `serve`: TLS 1.2+ with a client certificate required, signed
by the given CA; a client without one, with one of another CA, or speaking plain text
is refused at the handshake, before any byte reaches the binary. The coordinator
connects with `grpc.ssl_channel_credentials` (its own certificate and the CA) and
checks that the worker's certificate names the host it dialled.

`python -m tffdp.worker make-certs DIR --hosts HOST[,HOST...]` writes a small CA
(`ca.pem`, `ca.key`), one worker certificate for those hosts (`worker.pem`,
`worker.key`; also valid for `localhost` and 127.0.0.1) and a coordinator certificate
(`coordinator.pem`, `coordinator.key`); keys are written mode 0600. Keep `ca.key`
off the workers.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
import socket
import ssl
import sys
from typing import Callable, Sequence

# gRPC speaks HTTP/2: its TLS client requires the server to select ALPN "h2".
_ALPN = ['h2']
_CERT_FILES = ('ca.pem', 'ca.key', 'worker.pem', 'worker.key', 'coordinator.pem',
               'coordinator.key')


@dataclasses.dataclass(frozen=True)
class TlsFiles:
  """PEM files of one side of a mutual-TLS connection.

  Attributes:
    cert: This side's certificate chain (PEM).
    key: Its private key (PEM).
    ca: The CA certificate(s) the other side's certificate must chain to (PEM).
  """
  cert: str
  key: str
  ca: str

  def check(self) -> None:
    """Raises `ValueError` naming a file that is missing or unreadable."""
    for name in ('cert', 'key', 'ca'):
      path = getattr(self, name)
      if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise ValueError(f'tls_{name} must name a readable PEM file. Found {path!r}.')

  def channel_credentials(self):
    """`grpc.ChannelCredentials` of a coordinator: its certificate, and the CA."""
    import grpc  # pylint: disable=g-import-not-at-top
    read = lambda p: open(p, 'rb').read()
    return grpc.ssl_channel_credentials(root_certificates=read(self.ca),
                                        private_key=read(self.key),
                                        certificate_chain=read(self.cert))

  def server_context(self) -> ssl.SSLContext:
    """The worker's `ssl.SSLContext`: TLS 1.2+, a client certificate of the CA required."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(self.cert, self.key)
    ctx.load_verify_locations(self.ca)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(_ALPN)
    return ctx


def serve(listener: socket.socket, context: ssl.SSLContext, connect_upstream,
          log: Callable[[str], None] = print, max_connections: int = 64,
          handshake_timeout_s: float = 10.0) -> None:
  """Serves `listener` with TLS until the process ends, relaying each authenticated
  connection upstream. Blocks: run it in a thread of its own.

  One asyncio loop does every handshake and relay (TLS over memory BIOs in one thread:
  OpenSSL never sees concurrent reads and writes on one connection). A connection whose
  handshake fails or takes longer than `handshake_timeout_s` is closed before any byte
  reaches upstream; when either side of a relayed connection ends, both are closed (no
  half-closed TLS stream). At most `max_connections` are relayed at once.

  Args:
    listener: A bound, listening TCP socket (`bind_listener`).
    context: `TlsFiles.server_context()`.
    connect_upstream: Coroutine function returning `(reader, writer)` of a new
      connection to the TFF worker (`asyncio.open_unix_connection(path)`).
    log: One line per refused connection (peer and reason).
    max_connections: Concurrent relayed connections.
    handshake_timeout_s: Total time a client has for the TLS handshake.
  """
  import asyncio  # pylint: disable=g-import-not-at-top
  chunk = 1 << 20

  async def pump(reader, writer):
    try:
      while True:
        data = await reader.read(chunk)
        if not data:
          return
        writer.write(data)
        await writer.drain()
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
      return

  async def main():
    slots = asyncio.Semaphore(max_connections)

    async def handle(reader, writer):
      async with slots:
        peer = writer.get_extra_info('peername') or ('?', 0)
        try:  # the handshake first: nothing is read or relayed before it succeeds
          await writer.start_tls(context, ssl_handshake_timeout=handshake_timeout_s)
        except (ssl.SSLError, OSError, asyncio.TimeoutError) as e:
          log(f'tffdp.worker: refused {peer[0]}:{peer[1]} ({type(e).__name__}: '
              f'{getattr(e, "reason", None) or e})')
          writer.close()
          return
        try:
          up_reader, up_writer = await connect_upstream()
        except OSError as e:
          log(f'tffdp.worker: the TFF worker is not reachable ({e})')
          writer.close()
          return
        tasks = [asyncio.ensure_future(pump(reader, up_writer)),
                 asyncio.ensure_future(pump(up_reader, writer))]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
          t.cancel()
        for w in (writer, up_writer):
          w.close()

    server = await asyncio.start_server(handle, sock=listener)
    async with server:
      await server.serve_forever()

  asyncio.run(main())


def bind_listener(port: int) -> socket.socket:
  """A listening TCP socket on `port` of every interface (IPv6 dual-stack where there is
  one). Raises `OSError` if the port is taken."""
  if socket.has_dualstack_ipv6():
    return socket.create_server(('', port), family=socket.AF_INET6, dualstack_ipv6=True,
                                backlog=64)
  return socket.create_server(('', port), backlog=64)


def make_certs(directory: str, hosts: Sequence[str], days: int = 365,
               loopback: bool = True) -> dict[str, str]:
  """Writes a CA, a worker certificate for `hosts` and a coordinator certificate.

  Args:
    directory: Created if missing; the files go here (keys mode 0600).
    hosts: DNS names or IP addresses the workers are dialled by.
    days: Validity.
    loopback: Also name `localhost` and 127.0.0.1 in the worker certificate.

  Returns:
    File role -> path (`ca`, `ca_key`, `worker`, `worker_key`, `coordinator`,
    `coordinator_key`).

  Raises:
    FileExistsError: If `directory` already holds any of the six files (none is ever
      overwritten; each is created exclusively, not through a symlink).
  """
  # pylint: disable=g-import-not-at-top
  from cryptography import x509
  from cryptography.hazmat.primitives import hashes, serialization
  from cryptography.hazmat.primitives.asymmetric import ec
  from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
  # pylint: enable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  taken = [f for f in _CERT_FILES if os.path.lexists(os.path.join(directory, f))]
  if taken:
    raise FileExistsError(f'{directory} already holds {", ".join(taken)}; choose an empty '
                          'folder.')
  now = datetime.datetime.now(datetime.timezone.utc)
  name = lambda cn: x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
  ca_key = ec.generate_private_key(ec.SECP256R1())
  ca = (x509.CertificateBuilder().subject_name(name('tffdp CA')).issuer_name(name('tffdp CA'))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                     False), critical=True)
        .sign(ca_key, hashes.SHA256()))

  def leaf(cn, usage, sans):
    key = ec.generate_private_key(ec.SECP256R1())
    b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=days))
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if sans:
      b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(ca_key, hashes.SHA256()), key

  sans, seen = [], set()
  for h in list(hosts) + (['localhost', '127.0.0.1'] if loopback else []):
    if h in seen:
      continue
    seen.add(h)
    try:
      sans.append(x509.IPAddress(ipaddress.ip_address(h)))
    except ValueError:
      sans.append(x509.DNSName(h))
  worker, worker_key = leaf('tffdp worker', ExtendedKeyUsageOID.SERVER_AUTH, sans)
  coordinator, coordinator_key = leaf('tffdp coordinator', ExtendedKeyUsageOID.CLIENT_AUTH,
                                      [])
  paths = {}

  def write(role, filename, data: bytes, private: bool):
    path = os.path.join(directory, filename)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                 0o600 if private else 0o644)
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
    paths[role] = path

  pem = serialization.Encoding.PEM
  key_bytes = lambda k: k.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
  write('ca', 'ca.pem', ca.public_bytes(pem), False)
  write('ca_key', 'ca.key', key_bytes(ca_key), True)
  write('worker', 'worker.pem', worker.public_bytes(pem), False)
  write('worker_key', 'worker.key', key_bytes(worker_key), True)
  write('coordinator', 'coordinator.pem', coordinator.public_bytes(pem), False)
  write('coordinator_key', 'coordinator.key', key_bytes(coordinator_key), True)
  return paths


def main_make_certs(argv: Sequence[str]) -> int:
  """`python -m tffdp.worker make-certs DIR --hosts HOST[,HOST...]`."""
  import argparse  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser(prog='python -m tffdp.worker make-certs',
                              description=make_certs.__doc__.splitlines()[0])
  p.add_argument('directory')
  p.add_argument('--hosts', default='',
                 help='comma-separated names or IPs the workers are dialled by')
  p.add_argument('--days', type=int, default=365)
  args = p.parse_args(argv)
  try:
    paths = make_certs(args.directory, [h.strip() for h in args.hosts.split(',')
                                        if h.strip()], args.days)
  except FileExistsError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  print(f'workers:     --tls-cert {paths["worker"]} --tls-key {paths["worker_key"]} '
        f'--tls-ca {paths["ca"]}')
  print(f'coordinator: --tls-cert {paths["coordinator"]} --tls-key '
        f'{paths["coordinator_key"]} --tls-ca {paths["ca"]}')
  print(f'keep {paths["ca_key"]} off the workers (it signs certificates).')
  return 0
