"""The official `kubernetes` client, configured from a kubeconfig or the pod's service account, and raw
JSON calls: the gateway reads objects as the plain dicts the API server sends (what a watch delivers
too), so one code path serves list, get and watch without the client's model classes."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read: an API server that stops answering is noticed


def api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """In a pod (and no kubeconfig given): the service account; else the kubeconfig (KUBECONFIG, ~/.kube)."""
    configuration = client.Configuration()
    if kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in os.environ:
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    return client.ApiClient(configuration)


def call_json(method: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """`method` (a generated API call) answered as the JSON object the server sent; ApiException on error."""
    kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
    response = method(*args, _preload_content=False, **kwargs)
    return json.loads(response.data)


def status_of(error: Exception) -> int | None:
    """The HTTP status of an API error (404, 409, 410...), None for a transport failure."""
    return error.status if isinstance(error, ApiException) and error.status else None


def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)
