from graystack.cli import main

main()
