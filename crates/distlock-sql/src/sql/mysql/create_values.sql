CREATE TABLE IF NOT EXISTS `{values}` (
    resource VARBINARY(512) NOT NULL,
    value MEDIUMBLOB NOT NULL,
    expires_at TIMESTAMP(6) NULL,
    PRIMARY KEY (resource)
) ENGINE=InnoDB
