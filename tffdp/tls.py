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
import threading
from typing import Callable, Sequence

# gRPC speaks HTTP/2: its TLS client requires the server to select ALPN "h2".
_ALPN = ['h2']


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


def serve(port: int, context: ssl.SSLContext, connect_upstream: Callable[[], socket.socket],
          log: Callable[[str], None] = print, host: str = '') -> None:
  """Serves `port` with TLS forever, relaying each authenticated connection upstream.

  Args:
    port: TCP port to listen on (every interface unless `host`).
    context: `TlsFiles.server_context()`.
    connect_upstream: Returns a new connected socket to the TFF worker.
    log: One line per refused connection (peer and reason).
    host: Address to bind (default: every interface).
  """
  from tffdp.confined_worker import _pump  # pylint: disable=g-import-not-at-top
  server = socket.create_server((host, port), family=socket.AF_INET6
                                if socket.has_dualstack_ipv6() and not host else
                                socket.AF_INET, dualstack_ipv6=socket.has_dualstack_ipv6()
                                and not host)

  def handle(raw: socket.socket, peer) -> None:
    raw.settimeout(10)
    try:
      conn = context.wrap_socket(raw, server_side=True)
    except (ssl.SSLError, OSError) as e:
      log(f'tffdp.worker: refused {peer[0]}:{peer[1]} ({type(e).__name__}: '
          f'{getattr(e, "reason", None) or e})')
      raw.close()
      return
    conn.settimeout(None)
    try:
      upstream = connect_upstream()
    except OSError as e:
      log(f'tffdp.worker: the TFF worker is not reachable ({e})')
      conn.close()
      return
    back = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
    back.start()
    _pump(conn, upstream)
    back.join()
    conn.close()
    upstream.close()

  while True:
    raw, peer = server.accept()
    threading.Thread(target=handle, args=(raw, peer), daemon=True).start()


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
    FileExistsError: If `directory` already holds a `ca.key` (never overwritten).
  """
  # pylint: disable=g-import-not-at-top
  from cryptography import x509
  from cryptography.hazmat.primitives import hashes, serialization
  from cryptography.hazmat.primitives.asymmetric import ec
  from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
  # pylint: enable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  if os.path.exists(os.path.join(directory, 'ca.key')):
    raise FileExistsError(f'{directory} already holds ca.key; choose an empty folder.')
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
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
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
