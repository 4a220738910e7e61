"""The API's routers, one per area; create_app adds the routes of each. Each route reads what it needs from
app.state through service/dependencies.py and carries one access rule from service/auth.py."""
