from memory_bridge.cli import main

main()
