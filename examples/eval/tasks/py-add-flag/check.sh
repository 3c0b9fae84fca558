set -e
test "$(python3 greet.py --name bob)" = "Hello, bob!"
test "$(python3 greet.py --name bob --shout)" = "HELLO, BOB!"
test "$(python3 greet.py --shout)" = "HELLO, WORLD!"
python3 greet.py --help | grep -q -- --shout
