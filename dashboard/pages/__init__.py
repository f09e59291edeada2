"""Page modules with a render(con, month) function, imported by the dashboard's views
(right_sizing.py: the recommend plan). Page scripts live in dashboard/views/."""
