from crawlflow.entry import main

main()
