"""The rollout's checks, one module each behind `base.CheckKind`, registered in `table.CHECKS`.

Each check module imports only `base` and `common` here (the import contract keeps them independent
of each other), so a check is read, tested and removed on its own.
"""
