"""Tests of the built book, in a real browser."""
