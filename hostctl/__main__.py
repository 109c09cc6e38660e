from hostctl.cli import main

main()
