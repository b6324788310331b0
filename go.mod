module github.com/watertight-go/watertight

go 1.25.0
