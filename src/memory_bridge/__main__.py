from memory_bridge.cli.main import main

main()
