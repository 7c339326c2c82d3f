"""HTTP/1.1 with JSON over the task's Unix socket (GPUQ_TASK_SOCKET)."""

import http.client
import json
import socket


class SocketError(Exception):
    """The socket could not be reached (status None) or refused a request
    (status and field as the node answered)."""

    def __init__(self, message, status=None, field=None):
        super().__init__(message)
        self.status = status
        self.field = field


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("task", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


class TaskSocket:
    """One task socket; each request opens its own connection (thread-safe)."""

    def __init__(self, path):
        self.path = path

    def request(self, method, path, body=None, timeout=10):
        conn = _UnixConnection(self.path, timeout)
        try:
            headers = {}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise SocketError("task socket %s: %s" % (self.path, e))
            try:
                out = json.loads(raw or b"{}")
            except ValueError:
                raise SocketError("task socket %s: not JSON: %r" % (self.path, raw[:200]), resp.status)
            if resp.status >= 400:
                raise SocketError(out.get("error") or "HTTP %d" % resp.status, resp.status, out.get("field"))
            return out
        finally:
            conn.close()
