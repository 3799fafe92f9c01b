DELETE FROM `{values}` WHERE resource = ?
