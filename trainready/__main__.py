from trainready.cli import main

main()
