from crawlflow.cli import main

main()
