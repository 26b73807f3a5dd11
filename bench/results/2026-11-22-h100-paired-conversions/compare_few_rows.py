import json,math,sys
d=sys.argv[1]
k=json.load(open(d+'/kernel_bench_few_rows.json'))['results']
t=json.load(open(d+'/torch_few_rows.json'))['results']
tb={}
for x in t:
    if not x.get('passed'): continue
    key=(x['op'],x['dtype'],x['rows'])
    us=x.get('graph_median_us') or x['median_us']
    if key not in tb or us<tb[key][0]: tb[key]=(us,x['mode'])
rows=[]
for x in k:
    key=(x['op'],x['dtype'],x['rows'])
    ours=x.get('graph_median_us') or x['median_us']
    tu=(x.get('tuned') or {}).get('median_us')
    best=min([v for v in [ours,tu] if v])
    if key in tb: rows.append((key,ours,tu,best,tb[key][0],tb[key][1],tb[key][0]/best,(x.get('tuned') or {}).get('config')))
behind=0; g=0
for r in rows:
    print("%-13s %-8s %3d heur %.3f tuned %s best %.3f torch %.3f (%s) ratio %.3f %s" % (r[0][0],r[0][1],r[0][2],r[1],("%.3f"%r[2]) if r[2] else '-',r[3],r[4],r[5],r[6],r[7]))
    behind+= r[6]<1; g+=math.log(r[6])
print('behind',behind,'of',len(rows),'geomean %.3f'%math.exp(g/len(rows)), 'min %.3f'%min(r[6] for r in rows))
