"""The command line (``specdec``, also ``python -m specdec``): :mod:`.app`."""


def main(argv: list[str] | None = None) -> int:
    """The ``specdec`` command (:func:`specdec.cli.app.main`); here too so that a console script
    installed before the package took its layer folders keeps working."""
    from specdec.cli.app import main as app_main

    return app_main(argv)
