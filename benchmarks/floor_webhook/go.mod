module floorwebhook

go 1.22
