UPDATE `{table}` SET owner = CONNECTION_ID(), holder = {holder} WHERE name = {name}
