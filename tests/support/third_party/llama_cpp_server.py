"""llama.cpp's own HTTP server, through the `xllamacpp` wheel (which has no CLI of its own).

Run inside the `llama-cpp` venv (`make third-party`): `python llama_cpp_server.py MODEL.gguf PORT ALIAS
CONTEXT` (tokens, for its 2 slots). One thread (CI has two cores for everything), Prometheus `/metrics`
on, answers as model id `ALIAS`.
The server runs in a background thread of this process; SIGTERM ends both.
"""

import sys
import time

import xllamacpp


def main(model: str, port: int, alias: str, context: int) -> None:
    params = xllamacpp.CommonParams()
    params.model.path = model
    params.model_alias = {alias}
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = context
    params.n_parallel = 2
    params.endpoint_metrics = True
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    server = xllamacpp.Server(params)
    while server:
        time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
