-- Delete a limit. $1 name.
delete from limits
where name = $1
