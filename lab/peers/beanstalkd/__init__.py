"""beanstalkd (put / reserve / delete / release, with its binlog) as a peer of the designs."""
