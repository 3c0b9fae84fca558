set -e
python3 -m unittest -q test_stats 2>&1
python3 -c 'from stats import mean, median; assert mean([]) is None; assert median([]) is None; assert mean([2, 4]) == 3; assert median([5]) == 5'
grep -q '\[\]' test_stats.py
