"""The warm server's rooms: what a job and the server say (protocol), the server (server), the host probe it
measures first (probe); warmstart.py is the front door that starts it and hands it jobs."""
