"""The helpdesk page (Streamlit): ``page.py`` lays it out; ``views/`` turns the store's rows into
display data (pure); ``worker.py`` advances runs in the server process; ``app/`` holds the page
script ``refund-agent web`` serves."""
