from jobring.cli import main


def test_help_exits_usage_without_command(capsys: object) -> None:
    assert main([]) == 2
