set -e
python3 -m unittest -q test_calc 2>&1
# The test itself must be unchanged in what it asserts.
grep -q 'assertEqual(calc.add(2, 3), 5)' test_calc.py
python3 -c 'import calc; assert calc.add(-4, 4) == 0; assert calc.add(10, 5) == 15'
