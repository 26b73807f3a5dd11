"""The channel to kerntuned: plaintext, or TLS with a client certificate and
a bearer token for a TCP daemon that asks for them (kerntuned --tls_cert,
--tls_client_ca, --token_file). A unix: target takes none of them: the
socket's file mode decides who may connect, and the daemon knows each
caller's process.
"""

import grpc

from kerntune import _errors


def _pem(value):
    return value.encode() if isinstance(value, str) else value


def channel(target, options, root_certificates=None, certificate_chain=None,
            private_key=None, token=None):
    """A grpc.Channel to `target`; InvalidArgumentError for options that do not fit it."""
    if root_certificates is None and certificate_chain is None and private_key is None \
            and token is None:
        return grpc.insecure_channel(target, options=options)
    if target.startswith("unix:"):
        raise _errors.InvalidArgumentError(
            "%s: TLS and tokens are for TCP targets; the Unix socket is guarded by its file "
            "mode and the callers' credentials" % target)
    if root_certificates is None:
        raise _errors.InvalidArgumentError(
            "a client certificate or token needs TLS: pass root_certificates, the PEM of the "
            "CAs that sign the daemon's certificate; gRPC sends tokens over TLS only")
    if (certificate_chain is None) != (private_key is None):
        raise _errors.InvalidArgumentError(
            "certificate_chain and private_key go together: pass both or neither")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_pem(root_certificates), private_key=_pem(private_key),
        certificate_chain=_pem(certificate_chain))
    if token is not None:
        # As kerntuned reads its --token_file: surrounding whitespace is not
        # part of the token.
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.access_token_call_credentials(token.strip()))
    return grpc.secure_channel(target, credentials, options=options)
