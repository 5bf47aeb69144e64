"""Free ports for the processes of a local stack, picked before any of them binds its own."""

from graystack.local.processes import free_port


def test_ports_picked_before_anything_binds_them_are_all_different():
    """The kernel may offer one unbound port twice; two processes of a stack would then fight over it
    (seen in CI: Envoy could not bind its listener)."""
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
