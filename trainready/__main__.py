from trainready.entry import main

main()
