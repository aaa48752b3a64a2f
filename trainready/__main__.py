from trainready.cli.entry import main

main()
