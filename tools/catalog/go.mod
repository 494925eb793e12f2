module github.com/quotaware/throttle/tools/catalog

go 1.26.8
