"""The torch side that measures: run variants, time them, profile them, sweep problems, roofline."""
