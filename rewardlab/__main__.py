from rewardlab.cli import main

main()
