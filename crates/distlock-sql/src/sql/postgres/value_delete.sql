DELETE FROM "{values}" WHERE resource = $1
