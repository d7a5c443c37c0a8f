"""ddq host tools: virtual board, flash, pull/push, inspect, verify/records, replay, test."""
