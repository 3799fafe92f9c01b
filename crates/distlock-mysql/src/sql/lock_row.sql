UPDATE `{table}` SET owner = CONNECTION_ID() WHERE name = {name}
